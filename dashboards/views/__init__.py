"""The pages of the audit UI. Each module is a Streamlit page script (run by
``st.navigation`` in ``app.py``) whose ``render()`` draws the page."""
